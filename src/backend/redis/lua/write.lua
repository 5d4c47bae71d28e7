-- Conditional writes of rate-limit keys of one bucket (one hash slot), in one step.
-- KEYS[1]: the bucket's copy of the quotas (a hash: limit -> "VERSION:QUOTA");
-- KEYS[1 + i]: the key of write i ("VERSION:STATE").
-- ARGV[1]: "joint" (all or none) or "each" (each on its own); ARGV[2]: how long (ms) a
-- state is kept past its expiry; then five per write: limit, quota version, expected key
-- version ("" = must be absent), new state, expiry (unix ms).
-- A new key's version is the server's time in microseconds, so a key deleted and written
-- again never repeats a version an old client may still hold.
-- Returns three items per write: 1, the new version, false (written) or 0, the quota copy
-- and the key as found (not written; false where absent).
local joint = ARGV[1] == 'joint'
local grace = tonumber(ARGV[2])
local n = #KEYS - 1
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local function version(s, what)
  local sep = string.find(s, ':', 1, true)
  local v = sep and tonumber(string.sub(s, 1, sep - 1))
  if not v then
    error({err = 'FOREIGN ' .. what .. ' holds a value clusterlimit did not write'})
  end
  return v
end

local quota, key, holds, all = {}, {}, {}, true
for i = 1, n do
  local a = 3 + (i - 1) * 5
  quota[i] = redis.call('HGET', KEYS[1], ARGV[a])
  key[i] = redis.call('GET', KEYS[1 + i])
  local quota_ok = quota[i] and version(quota[i], 'the quota copy of ' .. ARGV[a]) == tonumber(ARGV[a + 1])
  local found = key[i] and version(key[i], KEYS[1 + i])
  local key_ok
  if ARGV[a + 2] == '' then
    key_ok = not found
  else
    key_ok = found == tonumber(ARGV[a + 2])
  end
  holds[i] = quota_ok and key_ok
  all = all and holds[i]
end

local out = {}
for i = 1, n do
  local a = 3 + (i - 1) * 5
  if holds[i] and (all or not joint) then
    local v = now
    if key[i] then
      v = version(key[i], KEYS[1 + i]) + 1
    end
    redis.call('SET', KEYS[1 + i], string.format('%.0f', v) .. ':' .. ARGV[a + 3],
      'PXAT', tonumber(ARGV[a + 4]) + grace)
    out[#out + 1] = 1
    out[#out + 1] = v
    out[#out + 1] = false
  else
    out[#out + 1] = 0
    out[#out + 1] = quota[i]
    out[#out + 1] = key[i]
  end
end
return out
