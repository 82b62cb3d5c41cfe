-- The members ordered before (score, member): a higher score, or the same score and a smaller
-- member. ZCOUNT on the score alone would miss the second kind; a tie group (its members sorted by
-- bytes) is searched by halves, O(log² n).
-- KEYS[1]: a board. ARGV: a score as stored (negated), a member.
--! include bytes_before
local higher = redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. ARGV[1])
local ties = redis.call('ZCOUNT', KEYS[1], ARGV[1], ARGV[1])
local low, high = 0, ties  -- members of the tie group before ARGV[2] number `low` once low == high
while low < high do
  local mid = math.floor((low + high) / 2)
  local member = redis.call('ZRANGE', KEYS[1], higher + mid, higher + mid)[1]
  if bytes_before(member, ARGV[2]) then low = mid + 1 else high = mid end
end
return higher + low
