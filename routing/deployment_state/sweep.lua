-- ARGV[7..]: the slots this worker is waiting for. Vouches for them, hands out slots whose
-- leases ran out, and answers which of those slots are granted (a lost message costs a
-- waiter one sweep).
for i = 7, #ARGV do redis.call('ZADD', K_HEARD, 'XX', now, ARGV[i]) end
dispatch(nil)
preempt_if_full()
-- Asked-back slots are announced again while interactive calls wait (a lost message).
if redis.call('ZCARD', K_QUEUE.interactive) > 0 then
  local asked = redis.call('SMEMBERS', K_PREEMPTING)
  if #asked > 0 then redis.call('PUBLISH', channel .. ':preempt', table.concat(asked, ' ')) end
end
local granted, lost = {}, {}
for i = 7, #ARGV do
  if redis.call('ZSCORE', K_SLOTS, ARGV[i]) then granted[#granted + 1] = ARGV[i]
  elseif redis.call('HEXISTS', K_WAITER, ARGV[i]) == 0 then lost[#lost + 1] = ARGV[i] end
end
return {granted, lost}
