-- Marks entries ARGV[5..] granted on a fair semaphore (and stores ARGV[4], the flows' virtual
-- times after these grants, as JSON), if its fair record is still at version
-- ARGV[2] and its capacity still ARGV[3]: the read the decision was made from, so two
-- Limiters never grant from the same marks. Marks of entries gone are dropped. The marked
-- entries' permits must fit the capacity, else nothing is written (a check, never expected
-- to fail). Returns {'nosem'}, {'plain'} (no fair record), {'conflict'}, {'over', USED} or
-- {'ok', then the tokens marked now}; tells waiters when written.
local cap = redis.call('HGET', KEYS[1], 'capacity')
if not cap then
  return {'nosem'}
end
local f = redis.call('HMGET', KEYS[5], 'ver', 'granted')
if not f[1] then
  return {'plain'}
end
if f[1] ~= ARGV[2] or cap ~= ARGV[3] then
  return {'conflict'}
end
prune()
local queued = {}
local q = queue_upto(nil)
for i = 1, #q, 2 do
  -- An unreadable value counts as heavier than any capacity: never granted on a guess.
  queued[q[i]] = tonumber(string.match(q[i + 1], '^(%d+) ')) or math.huge
end
local marks, used, seen = {'ok'}, 0, {}
local function mark(t)
  if queued[t] and not seen[t] then
    seen[t] = true
    marks[#marks + 1] = t
    used = used + queued[t]
  end
end
for t in string.gmatch(f[2] or '', '%d+') do
  mark(t)
end
for i = 5, #ARGV do
  mark(ARGV[i])
end
if used > tonumber(cap) then
  return {'over', int(used)}
end
local granted = table.concat(marks, ' ', 2)
redis.call('HSET', KEYS[5], 'ver', int(tonumber(f[1]) + 1), 'granted', granted, 'vtimes', ARGV[4])
redis.call('PUBLISH', ARGV[1], 'granted')
return marks
