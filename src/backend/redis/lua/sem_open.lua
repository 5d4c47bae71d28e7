-- Opens the semaphore, creating it with capacity ARGV[2] if absent and ARGV[2] is not empty.
-- Returns the stored capacity, or -1 when absent (and not created).
local stored = redis.call('HGET', KEYS[1], 'capacity')
if stored then
  return tonumber(stored)
end
if ARGV[2] == '' then
  return -1
end
redis.call('HSET', KEYS[1], 'capacity', ARGV[2], 'floor', 0, 'last', 0, 'ver', 1)
return tonumber(ARGV[2])
