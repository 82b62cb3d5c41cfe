-- A board's first ranks as its blob's text: the blob, or for a board of at most ARGV[1] members
-- (which has none) the same text made from the board; false for a larger board whose blob is
-- missing.
-- KEYS: the board, the other metric's board, the blob. ARGV[1]: the blob size.
--! include blobs
local blob = redis.call('GET', KEYS[3])
if blob then return blob end
local total = redis.call('ZCARD', KEYS[1])
if total > tonumber(ARGV[1]) then return false end
return blob_text(KEYS[1], KEYS[2], tonumber(ARGV[1]), total)
