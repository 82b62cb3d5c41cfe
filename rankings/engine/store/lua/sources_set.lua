-- Set a shard's from:K fields; with ARGV[2] = 'replace', every other from: field is deleted first,
-- else a field only ever grows.
-- KEYS[1]: the shard's state. ARGV: gen, 'replace' or 'grow', then pairs (field, value).
-- Returns 1, or 0 when the generation differs.
local state = KEYS[1]
if redis.call('HGET', state, 'gen') ~= ARGV[1] then return 0 end
if ARGV[2] == 'replace' then
    local fields = redis.call('HKEYS', state)
    for _, field in ipairs(fields) do
        if string.sub(field, 1, 5) == 'from:' then redis.call('HDEL', state, field) end
    end
end
for i = 3, #ARGV, 2 do
    local seen = tonumber(redis.call('HGET', state, ARGV[i]) or '0')
    if ARGV[2] == 'replace' or tonumber(ARGV[i + 1]) > seen then redis.call('HSET', state, ARGV[i], ARGV[i + 1]) end
end
return 1
