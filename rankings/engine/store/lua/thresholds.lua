-- What it takes to climb a board: its size, each rank's member and score (while the board is that
-- deep), the members scoring from each edge up to the next (the last: and above), and the state.
-- KEYS: a board, its shard's state. ARGV: how many ranks, the ranks (1-based), how many edges, the
-- edges (ascending scores, as stored: negated), then the state's fields.
local total = redis.call('ZCARD', KEYS[1])
local ranks, at = {}, 2
for i = 1, tonumber(ARGV[1]) do
  local rank = tonumber(ARGV[at])
  at = at + 1
  if rank <= total then
    local row = redis.call('ZRANGE', KEYS[1], rank - 1, rank - 1, 'WITHSCORES')
    ranks[#ranks + 1] = {rank, row[1], row[2]}
  end
end
local edges = tonumber(ARGV[at])
local counts = {}
for i = 1, edges do
  local above = i < edges and '(' .. ARGV[at + i + 1] or '-inf'
  counts[i] = redis.call('ZCOUNT', KEYS[1], above, ARGV[at + i])
end
return {total, ranks, counts, redis.call('HMGET', KEYS[2], unpack(ARGV, at + edges + 1))}
