-- Apply one batch of another layout's shard ARGV[1] (a field from:K) to this shard, exactly once:
-- applied unless the field already holds its number ARGV[2] or more; the shard's own seq counts
-- the batches it took.
-- KEYS as in apply.lua. ARGV: the field from:K, the batch's number, as_of, gen, blob size, then
-- the triples (board index, member, increment) as one MessagePack array.
-- Returns 1 = applied, 0 = already applied, -1 = the generation differs.
--! include blobs
--! include changes
local state = KEYS[1]
if redis.call('HGET', state, 'gen') ~= ARGV[4] then return -1 end
local seen = tonumber(redis.call('HGET', state, ARGV[1]) or '0')
if seen >= tonumber(ARGV[2]) then return 0 end
add_changes(ARGV[6])
write_blobs(2, #KEYS, tonumber(ARGV[5]))
redis.call('HINCRBY', state, 'seq', 1)
redis.call('HSET', state, ARGV[1], ARGV[2], 'asof', ARGV[3])
return 1
