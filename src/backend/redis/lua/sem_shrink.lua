-- Lowers entry ARGV[2]'s weight to ARGV[3] when it is above it, keeping its token; tells
-- waiters when it changed. Returns the weight stored afterwards; -1 when the entry is absent
-- (gone with its session), -2 on a fair semaphore (refused: its grants are marks that this
-- script does not write), -3 when the entry's value is not ours.
prune()
if redis.call('HGET', KEYS[1], 'fair') or redis.call('EXISTS', KEYS[5]) == 1 then
  return -2
end
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
