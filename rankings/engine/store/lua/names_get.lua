-- Names of products from their buckets, in one call: on one server, where a call may name keys of
-- any slot.
-- KEYS: each product's bucket. ARGV: the products, in the same order. Reply: their names, false
-- for a product whose bucket lacks it.
local names = {}
for i = 1, #KEYS do
    names[i] = redis.call('HGET', KEYS[i], ARGV[i])
end
return names
