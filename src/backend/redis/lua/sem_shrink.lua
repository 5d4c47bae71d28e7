-- Lowers entry ARGV[2]'s weight to ARGV[3] when it is above it, keeping its token; tells
-- waiters when it changed. Returns the weight stored afterwards; -1 when the entry is absent
-- (gone with its session), -3 when the entry's value is not ours. On a fair semaphore the
-- Limiter of a waiter the rule now grants writes that grant (fair_grants.rs), as after a
-- release: a weight only falls, so a grant decided before this change is never too large.
prune()
local value = redis.call('HGET', KEYS[3], ARGV[2])
if not value then
  return -1
end
local held, rest = string.match(value, '^(%d+)( .*)$')
if not held then
  return -3
end
local want = tonumber(ARGV[3])
if tonumber(held) <= want then
  return tonumber(held)
end
redis.call('HSET', KEYS[3], ARGV[2], ARGV[3] .. rest)
redis.call('PUBLISH', ARGV[1], 'shrunk')
return want
