-- Apply one batch of a shard, exactly once: the batch's sequence number must be the next one and
-- the shard's generation must match, or nothing is written.
-- KEYS: state, then triples (board, other metric's board, blob).
-- ARGV: seq, as_of, gen, blob size, then the triples (board index, member, increment) as one
-- MessagePack array.
-- Returns 1 = applied, 0 = already applied (a replay), -1 = the shard must be rebuilt (Redis lost
-- it, or a batch is missing).
--! include blobs
--! include changes
local state = KEYS[1]
local seq = tonumber(ARGV[1])
local cur = tonumber(redis.call('HGET', state, 'seq') or '0')
local gen = redis.call('HGET', state, 'gen')
if cur >= seq and gen == ARGV[3] then return 0 end
if cur ~= seq - 1 or (seq > 1 and gen ~= ARGV[3]) then return -1 end
add_changes(ARGV[5])
write_blobs(2, #KEYS, tonumber(ARGV[4]))
redis.call('HSET', state, 'seq', seq, 'asof', ARGV[2], 'gen', ARGV[3])
return 1
