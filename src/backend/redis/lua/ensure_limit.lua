-- Creates a limit's quota if absent (with ARGV[2]) and returns what is stored then.
-- KEYS[1]: the quotas (a hash: limit -> "VERSION:QUOTA"). ARGV[1]: the limit; ARGV[2], if
-- given: the quota to create it with. A new version is the server's time in microseconds.
-- Returns the stored "VERSION:QUOTA" (false if absent and no quota was given) and 1 if it
-- was created now, else 0.
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if stored or #ARGV < 2 then
  return {stored, 0}
end
local t = redis.call('TIME')
local v = tonumber(t[1]) * 1000000 + tonumber(t[2])
stored = string.format('%.0f', v) .. ':' .. ARGV[2]
redis.call('HSET', KEYS[1], ARGV[1], stored)
return {stored, 1}
