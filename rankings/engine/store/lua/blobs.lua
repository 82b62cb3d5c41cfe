-- Shared piece (included, never run alone): a board's blob.
-- blob_text: a board's first `size` ranks with both metrics' scores, as one JSON string. Scores are
-- copied as the strings Redis gives, so no precision is lost on the way to JSON; members are
-- product ids, which need no JSON escaping.
-- write_blobs: rewrite the blob of each board in KEYS[first..last] (triples: board, the other
-- metric's board, blob) from the board itself. A board of at most `size` members has no blob: it
-- would copy the whole board, and a read builds the same text from the board (head.lua).
local function blob_text(board, other, size, total)
    local rows = redis.call('ZRANGE', board, 0, size - 1, 'WITHSCORES')
    local parts = {}
    if #rows > 0 then
        local members = {}
        for j = 1, #rows, 2 do members[#members + 1] = rows[j] end
        local others = redis.call('ZMSCORE', other, unpack(members))
        for j = 1, #rows, 2 do
            local o = others[(j + 1) / 2]
            o = o and string.gsub(o, '^-', '') or '0'
            parts[#parts + 1] = '["' .. rows[j] .. '",' .. string.gsub(rows[j + 1], '^-', '') .. ',' .. o .. ']'
        end
    end
    return '{"total":' .. total .. ',"rows":[' .. table.concat(parts, ',') .. ']}'
end

local function write_blobs(first, last, size)
    for i = first, last, 3 do
        local board, other, blob = KEYS[i], KEYS[i + 1], KEYS[i + 2]
        local total = redis.call('ZCARD', board)
        if total <= size then
            redis.call('DEL', blob)
        else
            redis.call('SET', blob, blob_text(board, other, size, total))
        end
    end
end
