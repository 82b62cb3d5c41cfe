-- A whole board and the other metric's, with the shard's state, all of one batch; false for a
-- board of more than ARGV[1] members.
-- KEYS: the board, the other metric's board, the shard's state. ARGV: the most members to copy,
-- then the state's fields.
if redis.call('ZCARD', KEYS[1]) > tonumber(ARGV[1]) then return false end
return {redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES'), redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES'),
        redis.call('HMGET', KEYS[3], unpack(ARGV, 2))}
