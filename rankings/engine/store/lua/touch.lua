-- Move a shard's as_of forward when the clock moved but no board changed; only if Redis holds
-- exactly the batch the caller believes it holds.
-- KEYS[1]: the shard's state. ARGV: seq, as_of, gen. Returns 1 = moved, 0 = Redis holds another.
local state = KEYS[1]
if redis.call('HGET', state, 'seq') ~= ARGV[1] or redis.call('HGET', state, 'gen') ~= ARGV[3] then
    return 0
end
redis.call('HSET', state, 'asof', ARGV[2])
return 1
