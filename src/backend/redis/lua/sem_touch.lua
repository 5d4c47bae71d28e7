-- Keeps session ARGV[2] alive here until now + ARGV[3] ms, and checks that its entries
-- ARGV[4..] are all still queued. Returns -1 when the session is unknown here although it
-- has entries to check (it expired, was ended, or a failover lost it), else the number of its
-- entries missing: either means its permits here can no longer be trusted.
prune()
if #ARGV > 3 and not redis.call('HGET', KEYS[4], ARGV[2]) then
  return -1
end
redis.call('HSET', KEYS[4], ARGV[2], int(now_ms + tonumber(ARGV[3])))
local missing = 0
for i = 4, #ARGV do
  if redis.call('HEXISTS', KEYS[3], ARGV[i]) == 0 then
    missing = missing + 1
  end
end
return missing
