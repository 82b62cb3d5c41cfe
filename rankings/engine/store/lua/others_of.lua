-- Shared piece (included, never run alone): the other metric's scores (board `key`) of the members
-- of a ZRANGE ... WITHSCORES reply, in its order (false for a member without one).
local function others_of(key, rows)
  local members = {}
  for i = 1, #rows, 2 do members[#members + 1] = rows[i] end
  if #members == 0 then return {} end
  return redis.call('ZMSCORE', key, unpack(members))
end
