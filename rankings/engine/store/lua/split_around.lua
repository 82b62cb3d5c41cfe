-- A product's standing on a split board whose parts share one server, in one call: what
-- lua/neighbors.lua answers of its own part, then what lua/part_around.lua answers of each other
-- part (the score it counts with the product's own). Never sent to a Redis Cluster, where the
-- parts lie in different slots: there the two are two round trips.
-- KEYS: the own part's board, its other metric's board, its shard's state; then the same three of
-- each other part. ARGV: the product, n, the names' keys' beginning ('' for no names) and their
-- number of buckets (lua/names_of.lua), then the state's fields.
-- Reply: {the own part's reply, then each other part's}, each with its rows' names last.
--! include members_before
--! include others_of
--! include names_of
local product, n, head, buckets = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local function state(key) return redis.call('HMGET', key, unpack(ARGV, 5)) end
local function named(rows)
  if head == '' then return {} end
  return names_of(head, buckets, rows)
end
local replies = {}
local rank = redis.call('ZRANK', KEYS[1], product)
local score  -- none for an unranked product: only the others' sizes and states are used
if rank then
  local start = math.max(0, rank - n)
  local rows = redis.call('ZRANGE', KEYS[1], start, rank + n, 'WITHSCORES')
  score = rows[2 * (rank - start) + 2]
  replies[1] = {rank, start, rows, others_of(KEYS[2], rows), redis.call('ZCARD', KEYS[1]), state(KEYS[3]), named(rows)}
else
  replies[1] = {false, 0, {}, {}, redis.call('ZCARD', KEYS[1]), state(KEYS[3]), {}}
end
for k = 4, #KEYS, 3 do
  local before = 0
  if rank then before = members_before(KEYS[k], score, product) end
  local start, rows = math.max(0, before - n), {}
  if rank and n > 0 then rows = redis.call('ZRANGE', KEYS[k], start, before + n - 1, 'WITHSCORES') end
  replies[#replies + 1] = {before, start, rows, others_of(KEYS[k + 1], rows), redis.call('ZCARD', KEYS[k]), state(KEYS[k + 2]), named(rows)}
end
return replies
