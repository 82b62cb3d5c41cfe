-- What one part adds to a product's rank on a split board: the members ordered before (score,
-- member) (lua/members_before.lua), the board's size and the shard's state.
-- KEYS: a board, its shard's state. ARGV: a score as stored (negated), a member, then the state's
-- fields.
--! include members_before
local before = members_before(KEYS[1], ARGV[1], ARGV[2])
return {before, redis.call('ZCARD', KEYS[1]), redis.call('HMGET', KEYS[2], unpack(ARGV, 3))}
