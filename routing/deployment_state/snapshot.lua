purge_silent()
local st = redis.call('HMGET', K_STATE, 'mode', 'limit', 'failures', 'open_until', 'reason')
local oldest = nil
for _, class in ipairs({'interactive', 'batch'}) do
  local first = redis.call('ZRANGE', K_QUEUE[class], 0, 0, 'WITHSCORES')
  if #first > 0 and (oldest == nil or tonumber(first[2]) < oldest) then
    oldest = tonumber(first[2])
  end
end
return {st[1] or 'closed', st[2] or tostring(maxc), st[3] or '0', st[4] or '0', st[5] or '',
        redis.call('ZCOUNT', K_SLOTS, now, '+inf'), redis.call('ZCOUNT', K_BATCH, now, '+inf'),
        redis.call('ZCARD', K_QUEUE.interactive), redis.call('ZCARD', K_QUEUE.batch),
        tostring(oldest and now - oldest or 0)}
