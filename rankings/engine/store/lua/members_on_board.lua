-- Those of the members asked about that are on a board, with both metrics' scores, and the shard's
-- state, all of one batch: O(members) work whatever the board's size.
-- KEYS: the board, the other metric's board, the shard's state. ARGV: the state's fields (3), then
-- the members. Returns the state, then {member, score, other metric's score or false} of each
-- member on the board.
local CHUNK = 1000  -- members per ZMSCORE: unpack() refuses a few thousand values at once
local found = {redis.call('HMGET', KEYS[3], ARGV[1], ARGV[2], ARGV[3])}
for first = 4, #ARGV, CHUNK do
  local last = math.min(first + CHUNK - 1, #ARGV)
  local scores = redis.call('ZMSCORE', KEYS[1], unpack(ARGV, first, last))
  local others = redis.call('ZMSCORE', KEYS[2], unpack(ARGV, first, last))
  for i = 1, last - first + 1 do
    if scores[i] then
      found[#found + 1] = {ARGV[first + i - 1], scores[i], others[i]}
    end
  end
end
return found
