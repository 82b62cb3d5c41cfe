-- Put rebuilt boards in place and rewrite their blobs in one step: readers see the old boards with
-- their blobs or the new ones with theirs, never a missing or half-written board, nor a blob that
-- lags its board. Temporary boards carry a TTL (so that a rebuild that dies leaves nothing
-- behind); the live board must not inherit it, as RENAME would make it. If a temporary board is
-- gone, nothing at all is changed.
-- KEYS: state, then pairs (temporary, live), then triples (board, other metric's board, blob),
-- then the stale live keys to delete (declared as keys, all of the shard's slot, so that Redis
-- Cluster runs the call on their node).
-- ARGV: seq, as_of, gen, number of pairs, blob size, number of triples.
--! include blobs
local pairs_end = 1 + 2 * tonumber(ARGV[4])
for i = 2, pairs_end, 2 do
    if redis.call('EXISTS', KEYS[i]) == 0 then
        return redis.error_reply('temporary board ' .. KEYS[i] .. ' is gone (expired?); nothing was swapped')
    end
end
for i = 2, pairs_end, 2 do
    redis.call('RENAME', KEYS[i], KEYS[i + 1])
    redis.call('PERSIST', KEYS[i + 1])
end
local triples_end = pairs_end + 3 * tonumber(ARGV[6])
for i = triples_end + 1, #KEYS do
    redis.call('DEL', KEYS[i])
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'seq', ARGV[1], 'asof', ARGV[2], 'gen', ARGV[3])
write_blobs(pairs_end + 1, triples_end, tonumber(ARGV[5]))
return 1
