-- Shared piece (included, never run alone): add a batch's changes, ARGV's triples (board index in
-- KEYS, member, increment) from ARGV[first] on; a member whose score is no longer positive (scores
-- are stored negated) leaves its board.
local function add_changes(first)
    for i = first, #ARGV, 3 do
        local key = KEYS[tonumber(ARGV[i])]
        local member = ARGV[i + 1]
        local score = tonumber(redis.call('ZINCRBY', key, ARGV[i + 2], member))
        if score >= 0 then redis.call('ZREM', key, member) end
    end
end
