-- What one part adds to a product's rank on a split board: the members ordered before (score,
-- member) (as ordered_before.lua), the board's size and the shard's state.
-- KEYS: a board, its shard's state. ARGV: a score as stored (negated), a member, then the state's
-- fields.
--! include bytes_before
local higher = redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. ARGV[1])
local ties = redis.call('ZCOUNT', KEYS[1], ARGV[1], ARGV[1])
local low, high = 0, ties
while low < high do
  local mid = math.floor((low + high) / 2)
  local member = redis.call('ZRANGE', KEYS[1], higher + mid, higher + mid)[1]
  if bytes_before(member, ARGV[2]) then low = mid + 1 else high = mid end
end
return {higher + low, redis.call('ZCARD', KEYS[1]), redis.call('HMGET', KEYS[2], unpack(ARGV, 3))}
