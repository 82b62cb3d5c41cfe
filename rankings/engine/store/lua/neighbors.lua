-- A product's rank on a board and the members from n ranks above it to n below it, with both
-- metrics' scores, the board's size and its shard's state, and their names: a product's
-- neighbours in one call (of a split board, those in its own part), O(log n + n).
-- KEYS: the board, the other metric's board, the shard's state. ARGV: the product, n, the names'
-- keys' beginning ('' for no names: a whole board on a Redis Cluster, whose names lie in other
-- slots), their number of buckets, then the state's fields.
-- Reply: {its rank (0-based; false, and nothing read, when it is not on the board), the rank of
-- the first member read, those members with their scores (as ZRANGE ... WITHSCORES), their other
-- metric's scores, the board's size, the state, their names (empty for no names)}.
--! include others_of
--! include names_of
local total = redis.call('ZCARD', KEYS[1])
local state = redis.call('HMGET', KEYS[3], unpack(ARGV, 5))
local rank = redis.call('ZRANK', KEYS[1], ARGV[1])
if not rank then return {false, 0, {}, {}, total, state, {}} end
local n = tonumber(ARGV[2])
local start = math.max(0, rank - n)
local rows = redis.call('ZRANGE', KEYS[1], start, rank + n, 'WITHSCORES')
local names = {}
if ARGV[3] ~= '' then names = names_of(ARGV[3], tonumber(ARGV[4]), rows) end
return {rank, start, rows, others_of(KEYS[2], rows), total, state, names}
