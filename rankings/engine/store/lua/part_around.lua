-- What one other part adds to a product's neighbours on a split board, in one call: the members
-- ordered before (score, member) (lua/members_before.lua), the n just before that place and the n
-- from it on with both metrics' scores, the board's size and its shard's state. O(log n + n)
-- (O(log² n + n) where Redis refuses the count's write).
-- KEYS: a board, the other metric's board, its shard's state. ARGV: a score as stored (negated),
-- '' for none (an unranked product: 0 members before, nothing read), a member, n, the names'
-- keys' beginning ('' for no names) and their number of buckets (lua/names_of.lua), then the
-- state's fields.
-- Reply: {members before, the rank of the first member read, those members with their scores (as
-- ZRANGE ... WITHSCORES), their other metric's scores, the board's size, the state, their names}.
--! include members_before
--! include others_of
--! include names_of
local before = 0
if ARGV[1] ~= '' then before = members_before(KEYS[1], ARGV[1], ARGV[2]) end
local n = tonumber(ARGV[3])
local start = math.max(0, before - n)
local rows = {}
if n > 0 then rows = redis.call('ZRANGE', KEYS[1], start, before + n - 1, 'WITHSCORES') end
local names = {}
if ARGV[4] ~= '' then names = names_of(ARGV[4], tonumber(ARGV[5]), rows) end
local total = redis.call('ZCARD', KEYS[1])
return {before, start, rows, others_of(KEYS[2], rows), total, redis.call('HMGET', KEYS[3], unpack(ARGV, 6)), names}
