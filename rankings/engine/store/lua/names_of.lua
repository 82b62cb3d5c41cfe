-- Shared piece (included, never run alone): the names of the members of a ZRANGE ... WITHSCORES
-- reply, in its order (false for a member without one), from Redis's copy of the catalogue's
-- names (rankings/engine/store/names.py): keys `head`{nB}, B the member's SHA-1 modulo `buckets`
-- (a power of two up to 2^20, so its last 20 bits suffice, as bucket_of takes it). It reads keys
-- the call does not name: any on one server; on a Redis Cluster only those of the call's own slot
-- (a split board's part's own copy, whose keys carry the part's hash tag).
local function names_of(head, buckets, rows)
  local names = {}
  for i = 1, #rows, 2 do
    local bucket = tonumber(string.sub(redis.sha1hex(rows[i]), -5), 16) % buckets
    names[#names + 1] = redis.call('HGET', head .. '{n' .. bucket .. '}', rows[i])
  end
  return names
end
