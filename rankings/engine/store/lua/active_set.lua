-- Point readers at a version, unless the pointer already names a later switch: a writer that read
-- PostgreSQL before a switch committed can never move the pointer back. A pointer written before
-- switches were numbered (a plain string) is replaced.
-- KEYS[1]: the pointer (P:active). ARGV[1]: the version, ARGV[2]: the switch (epoch) that made it
-- active. Returns the version the pointer names afterwards.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'hash' then
    local epoch = tonumber(redis.call('HGET', KEYS[1], 'epoch') or '-1')
    if epoch > tonumber(ARGV[2]) then
        return tonumber(redis.call('HGET', KEYS[1], 'version'))
    end
elseif kind ~= 'none' then
    redis.call('DEL', KEYS[1])
end
redis.call('HSET', KEYS[1], 'version', ARGV[1], 'epoch', ARGV[2])
return tonumber(ARGV[1])
