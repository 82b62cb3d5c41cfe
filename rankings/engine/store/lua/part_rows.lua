-- What one part gives a deep page of a split board, in one call: its ranks start..stop, with their
-- scores (as stored, negated) as integers, so that the reader orders them with no parsing, and
-- their other metric's scores (as stored, false for none); the board's size and its shard's state.
-- Scores are whole numbers (units, cents, counts), exact in a Lua number below 2^53. O(log n + rows).
-- KEYS: the board, the other metric's board, its shard's state. ARGV: start, stop (0-based,
-- inclusive; nothing read when stop < start), then the state's fields.
-- Reply: {the members, their scores, their other metric's scores, the board's size, the state}.
local members, scores, others = {}, {}, {}
if tonumber(ARGV[2]) >= tonumber(ARGV[1]) then
  local rows = redis.call('ZRANGE', KEYS[1], ARGV[1], ARGV[2], 'WITHSCORES')
  for i = 1, #rows, 2 do
    members[#members + 1] = rows[i]
    scores[#scores + 1] = tonumber(rows[i + 1])
  end
  if #members > 0 then others = redis.call('ZMSCORE', KEYS[2], unpack(members)) end
end
return {members, scores, others, redis.call('ZCARD', KEYS[1]), redis.call('HMGET', KEYS[3], unpack(ARGV, 3))}
