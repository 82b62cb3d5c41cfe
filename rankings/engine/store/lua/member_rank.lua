-- One product's rank, its scores on a board and the other metric's, the board's size and its
-- shard's state: one command instead of five (what a rank costs is mostly the client's work per
-- command).
-- KEYS: the board, the other metric's board, the shard's state. ARGV: the product, then the
-- state's fields to read.
local rank = redis.call('ZRANK', KEYS[1], ARGV[1])
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
local other = redis.call('ZSCORE', KEYS[2], ARGV[1])
return {rank, score, other, redis.call('ZCARD', KEYS[1]), redis.call('HMGET', KEYS[3], unpack(ARGV, 2))}
