-- Shared piece (included, never run alone): the members of a board ordered before (score,
-- member): a higher score, or the same score and a smaller member. The score as stored (negated).
-- For a member the board does not hold (another part's product on a split board, an unranked
-- product's climb): the member put into the board with that score, its rank read and the member
-- taken out again, in this call, with no other command between: O(log n). It is a write all the
-- same: replicated, and seen by a WATCH and by keyspace events. For a member the board holds, or
-- where Redis refuses the write (its memory full under noeviction, a user without write rights):
-- the tie group (its members sorted by bytes; ZCOUNT on the score alone would miss the ties before
-- the member) searched by halves down to TIES_READ members, then those read at once: O(log² n).
--! include bytes_before
local TIES_READ = 32
local function members_before(key, score, member)
  if redis.pcall('ZADD', key, 'NX', score, member) == 1 then
    local rank = redis.call('ZRANK', key, member)
    redis.call('ZREM', key, member)
    return rank
  end
  local higher = redis.call('ZCOUNT', key, '-inf', '(' .. score)
  local ties = redis.call('ZCOUNT', key, score, score)
  -- The tie group's members before `member` are those below `low`, and none from `high` on.
  local low, high = 0, ties
  while high - low > TIES_READ do
    local mid = math.floor((low + high) / 2)
    local found = redis.call('ZRANGE', key, higher + mid, higher + mid)[1]
    if bytes_before(found, member) then low = mid + 1 else high = mid end
  end
  if low < high then
    for _, found in ipairs(redis.call('ZRANGE', key, higher + low, higher + high - 1)) do
      if not bytes_before(found, member) then break end
      low = low + 1
    end
  end
  return higher + low
end
