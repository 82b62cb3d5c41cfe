-- Names of products from their buckets, in one call: on one server, where a call may name keys of
-- any slot; on a Redis Cluster, of buckets that share one (a split board's part's).
-- KEYS: each product's bucket. ARGV: the products, in the same order. Reply: their names, false
-- for a product whose bucket lacks it.
local names = {}
for i = 1, #KEYS do
    names[i] = redis.call('HGET', KEYS[i], ARGV[i])
end
return names
