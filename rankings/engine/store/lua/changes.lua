-- Shared piece (included, never run alone): add a batch's changes, `packed` a MessagePack array of
-- triples (board index in KEYS, member, increment); a member whose score is no longer positive
-- (scores are stored negated) leaves its board.
local function add_changes(packed)
    local changes = cmsgpack.unpack(packed)
    for i = 1, #changes, 3 do
        local key = KEYS[changes[i]]
        local member = changes[i + 1]
        local score = tonumber(redis.call('ZINCRBY', key, changes[i + 2], member))
        if score >= 0 then redis.call('ZREM', key, member) end
    end
end
