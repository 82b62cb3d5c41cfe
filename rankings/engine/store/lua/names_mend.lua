-- Mend names where Redis still holds what the caller read before it read the catalogue: a name
-- written meanwhile (a push's, after its commit) is newer than the caller's and is kept.
-- KEYS: each product's bucket. ARGV: a triple per key (the product, the name read before or ''
-- for none, the catalogue's name or '' for no product).
-- Reply: {how many names changed, then each product whose name had changed since the first read}.
local reply = {0}
for i = 1, #KEYS do
    local product, before, now = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
    local held = redis.call('HGET', KEYS[i], product) or ''
    if held ~= before then
        reply[#reply + 1] = product
    elseif held ~= now then
        if now == '' then
            redis.call('HDEL', KEYS[i], product)
        else
            redis.call('HSET', KEYS[i], product, now)
        end
        reply[1] = reply[1] + 1
    end
end
return reply
