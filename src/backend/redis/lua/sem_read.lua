-- The semaphore now: {} when absent, else {CAPACITY, FLOOR, LAST, VER, NEXT_EXPIRY_MS, FAIR,
-- then TOKEN, VALUE pairs in token order, up to token ARGV[2] when given}; NEXT_EXPIRY_MS is
-- when the earliest session with entries here lapses, from now (-1: none), so a waiter knows
-- when to look again; FAIR is the fair record (see fair_item: '' on a plain semaphore). A
-- watch reads only up to its last waiter: a long queue behind it costs nothing; on a fair
-- semaphore the whole queue is read (a later flow may be granted first).
local cap = redis.call('HMGET', KEYS[1], 'capacity', 'floor', 'last', 'ver')
if not cap[1] then
  return {}
end
prune()
local next_expiry = -1
local sessions = redis.call('HVALS', KEYS[4])
for _, d in ipairs(sessions) do
  local left = tonumber(d) - now_ms
  if next_expiry < 0 or left < next_expiry then
    next_expiry = left
  end
end
local fair = fair_item()
local out = {cap[1], cap[2], cap[3], cap[4], int(next_expiry), fair}
local upto = nil
if ARGV[2] and ARGV[2] ~= '' and fair == '' then
  upto = tonumber(ARGV[2])
end
for _, v in ipairs(queue_upto(upto)) do
  out[#out + 1] = v
end
return out
