-- Removes entry ARGV[2]; an absent one counts as removed. Returns 1 if it was there.
prune()
local removed = redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[2])
if removed > 0 then
  redis.call('PUBLISH', ARGV[1], 'removed')
end
return removed
