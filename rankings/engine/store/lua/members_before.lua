-- Shared piece (included, never run alone): the members of a board ordered before (score,
-- member): a higher score, or the same score and a smaller member. ZCOUNT on the score alone
-- would miss the second kind; a tie group (its members sorted by bytes) is searched by halves,
-- O(log² n). The score as stored (negated).
--! include bytes_before
local function members_before(key, score, member)
  local higher = redis.call('ZCOUNT', key, '-inf', '(' .. score)
  local ties = redis.call('ZCOUNT', key, score, score)
  local low, high = 0, ties  -- members of the tie group before `member` number `low` once low == high
  while low < high do
    local mid = math.floor((low + high) / 2)
    local found = redis.call('ZRANGE', key, higher + mid, higher + mid)[1]
    if bytes_before(found, member) then low = mid + 1 else high = mid end
  end
  return higher + low
end
