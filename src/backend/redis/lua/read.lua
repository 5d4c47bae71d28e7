-- A rate-limit key and its bucket's copy of its limit's quota, read in one step.
-- KEYS[1]: the bucket's quota copies; KEYS[2]: the key. ARGV[1]: the limit.
-- Returns the quota copy and the key ("VERSION:…", false where absent).
return {redis.call('HGET', KEYS[1], ARGV[1]), redis.call('GET', KEYS[2])}
