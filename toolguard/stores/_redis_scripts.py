"""The Lua scripts of :class:`~toolguard.stores.RedisStore`: one per operation, each atomic on
the server and run by ``EVALSHA`` (with ``EVAL`` after a ``NOSCRIPT``), so a call costs one
round trip per store operation. Their key layout is in :mod:`toolguard.stores.redis`.
"""

from __future__ import annotations

import hashlib
from typing import Final, NamedTuple

# Shared by every script. KEYS[1..5] are always meta, sigs, seen, appr, recs; KEYS[6] the
# call's record. ``touch`` refreshes the task's TTL; ``recs`` only ever grows its TTL, since
# it must outlive records whose TTL exceeds the task's.
_PRELUDE: Final = """
local function extend(k, ms)
  if redis.call('PTTL', k) < ms then redis.call('PEXPIRE', k, ms) end
end
local function touch(ms)
  for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], ms) end
  extend(KEYS[5], ms)
end
-- The task's generation marker (lost-state detection): ARGV[#ARGV - 1] is the generation
-- this worker last saw ('' for none), ARGV[#ARGV] a fresh one to start with. A task this
-- worker knows whose marker is gone, or was started over by another worker since, lost
-- its state: refuse (false) rather than count from zero.
local function generation(create)
  local known, fresh = ARGV[#ARGV - 1], ARGV[#ARGV]
  local have = redis.call('HGET', KEYS[1], 'gen')
  if have then
    if known ~= '' and known ~= have then return false end
    return have
  end
  if known ~= '' then return false end
  if create then
    redis.call('HSET', KEYS[1], 'gen', fresh)
    return fresh
  end
  return ''
end
local LOST = 'TOOLGUARD_STATE_LOST'
-- the tail of a claim whose begin reply was lost and whose worker gave it up (no call id)
local ABANDONED = '|[null,null]'
"""

# MemoryStore.begin, line for line. Times are passed as Python float reprs and only
# compared in Lua (tonumber is exact on them), never formatted (Lua's %.14g would round).
_BEGIN: Final = _PRELUDE + """
local tool, sig, key = ARGV[1], ARGV[2], ARGV[3]
local claim, task_scope = ARGV[4] == '1', ARGV[5] == '1'
local count, poll = ARGV[6] == '1', ARGV[7] == '1'
local now, claim_exp = ARGV[8], ARGV[9]
local claim_ms, state_ms = tonumber(ARGV[10]), tonumber(ARGV[11])
local claim_tail = ARGV[12]  -- the claiming call's id, as the record's JSON tail
-- the record tails of this worker's begins of this key whose replies were lost (one per
-- line), or '': a claim they left is this call's to take over
local orphan = ARGV[14]
-- a claim is kept until claim_end (claim_end_ms from now): past its TTL (claim_exp) and
-- never finished, it reads as an unknown outcome until then (see toolguard.stores._base)
local claim_end, claim_end_ms = ARGV[15], tonumber(ARGV[16])
local function owned(v, tails)
  for t in string.gmatch(tails, '[^\\n]+') do
    if string.sub(v, -#t) == t then return true end
  end
  return false
end
local gen = generation(true)
if not gen then return redis.error_reply(LOST) end
local m = redis.call('HMGET', KEYS[1], 'epoch', 'calls', 'in', 'out', 'started', 'halted',
                     't:' .. tool, 'f:' .. tool, 'changes', 'last', 's:' .. tool)
local changes = tonumber(m[9] or '0')
local epoch = tonumber(m[1] or '0')
local calls = tonumber(m[2] or '0')
local tool_calls = tonumber(m[7] or '0')
local started = m[5]
if not started then
  started = now
  redis.call('HSET', KEYS[1], 'started', now)
end
local n, polls, digest, resets = 0, 0, '', '0'
local raw = redis.call('HGET', KEYS[2], sig)
if raw then
  local e, c, p, d, r = string.match(raw, '^(%d+) (%d+) (%d+) (%S*) ?(%d*)$')
  digest = d
  if r ~= '' then resets = r end
  if tonumber(e) == epoch then n, polls = tonumber(c), tonumber(p) end
end
local run_n, run_outcome, run_sig = 0, '', ''
local transient = tonumber(redis.call('HGET', KEYS[1], 'x:' .. sig) or '0')
if m[11] then
  local e, c, o, g = string.match(m[11], '^(%d+) (%d+) (%S+) (.*)$')
  if tonumber(e) == epoch then run_n, run_outcome, run_sig = tonumber(c), o, g end
end
local record, approval, claimed, adopted = false, false, 0, false
local function put_claim()
  redis.call('SET', KEYS[6], 'p|' .. changes .. '|' .. claim_end .. '|' .. now .. '|'
             .. claim_exp .. '|' .. claim_tail, 'PX', claim_end_ms)
  extend(KEYS[5], claim_end_ms)
end
if key ~= '' then
  local v = redis.call('GET', KEYS[6])
  local overdue = false  -- a claim past its TTL that its call never finished
  if v then
    local st, e, x = string.match(v, '^(%a)|(%d+)|([^|]+)|')
    if tonumber(x) <= tonumber(now) then
      v = false  -- expired on the guard's clock
    elseif st == 'c' and not task_scope and count and tonumber(e) ~= changes then
      v = false  -- until_change: lapsed at a write or turn since (kept, as in memory);
                 -- never for a call that waited on it (count false): see MemoryStore
    elseif st == 'p' then
      local due = string.match(v, '^p|%d+|[^|]+|[^|]+|([%d.eE+-]+)|')
      overdue = due ~= nil and tonumber(due) <= tonumber(now)
    end
  end
  local mine = false
  if v and claim and string.sub(v, 1, 2) == 'p|' then
    if ARGV[13] == '1' and not overdue and string.sub(v, -#claim_tail) == claim_tail then
      mine = true  -- this call's own claim: a begin retried after its reply was lost
    elseif orphan ~= '' and owned(v, orphan) or string.sub(v, -#ABANDONED) == ABANDONED then
      -- the claim of this worker's identical call whose begin reply was lost (it never
      -- ran), or one its worker has since abandoned for that reason: this call takes it
      -- over under its own call id
      put_claim()
      mine, adopted = true, true
    end
  end
  if v and not mine and string.sub(v, -#ABANDONED) == ABANDONED then
    v = false  -- a claim nobody runs: as good as none to a call that does not claim
  end
  if v and not mine and overdue then
    -- handed to its tool and never reported: it may have happened
    local e, x, due, rest = string.match(v, '^p|(%d+)|([^|]+)|[^|]+|([^|]+)|(.*)$')
    v = 'u|' .. e .. '|' .. x .. '|' .. due .. '|' .. rest
  end
  if mine then
    claimed = 1
  elseif v then
    record = v
  elseif claim then
    put_claim()
    redis.call('SADD', KEYS[5], key)
    claimed = 1
  end
  approval = redis.call('HGET', KEYS[4], key)
end
-- a duplicate of a call that is running right now is the same call, not a repeat
local concurrent = record and string.sub(record, 1, 2) == 'p|'
-- a refused call of a halted task is free; a retry that took over its lost twin's claim
-- was counted by that twin's begin
if count and not m[6] and not adopted then
  calls = redis.call('HINCRBY', KEYS[1], 'calls', 1)
  tool_calls = redis.call('HINCRBY', KEYS[1], 't:' .. tool, 1)
  if poll then polls = polls + 1 elseif not concurrent then n = n + 1 end
  if m[10] ~= sig then  -- another call came in between: its run of resets starts afresh
    resets = '0'
    redis.call('HSET', KEYS[1], 'last', sig)
  end
end
redis.call('HSET', KEYS[2], sig,
           epoch .. ' ' .. n .. ' ' .. polls .. ' ' .. digest .. ' ' .. resets)
touch(state_ms)
return {gen, {epoch, calls, tool_calls, tonumber(m[8] or '0'), tonumber(m[3] or '0'),
        tonumber(m[4] or '0'), started, math.max(n, 1), polls, record, approval, claimed, m[6],
        run_n, run_outcome, run_sig, transient}}
"""

# MemoryStore.finish, line for line. The seen pair is length-prefixed: unambiguous for any
# signature and digest.
_FINISH: Final = _PRELUDE + """
local tool, sig, key = ARGV[1], ARGV[2], ARGV[3]
local executed, success, mutating = ARGV[4] == '1', ARGV[5] == '1', ARGV[6] == '1'
local digest, mode, tail = ARGV[7], ARGV[8], ARGV[9]
local rec_ms, now, rec_exp = tonumber(ARGV[10]), ARGV[11], ARGV[12]
local halt, state_ms = ARGV[13], tonumber(ARGV[14])
local outcome, max_resets = ARGV[15], tonumber(ARGV[16])
local transient, progress = ARGV[17] == '1', ARGV[18]
local gen = generation(true)
if not gen then return redis.error_reply(LOST) end
local epoch = tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0')
local changes = tonumber(redis.call('HGET', KEYS[1], 'changes') or '0')
if executed and success and mutating then
  changes = redis.call('HINCRBY', KEYS[1], 'changes', 1)  -- any write lapses until_change
end
if executed then
  if success then
    redis.call('HSET', KEYS[1], 'f:' .. tool, 0)
  else
    redis.call('HINCRBY', KEYS[1], 'f:' .. tool, 1)
  end
  if transient then
    local raw = redis.call('HGET', KEYS[2], sig)
    if raw then
      local se, c, p, d, r = string.match(raw, '^(%d+) (%d+) (%d+) (%S*) ?(%d*)$')
      if tonumber(c) > 0 then  -- a retry of a transient failure is not a repeat
        redis.call('HSET', KEYS[2], sig,
                   se .. ' ' .. (tonumber(c) - 1) .. ' ' .. p .. ' ' .. d .. ' ' .. r)
      end
    end
    redis.call('HINCRBY', KEYS[1], 'x:' .. sig, 1)
  else
    redis.call('HDEL', KEYS[1], 'x:' .. sig)
  end
  if success and digest ~= '' then
    local e, n, polls, last, resets = epoch, 0, 0, '', 0
    local raw = redis.call('HGET', KEYS[2], sig)
    if raw then
      local se, c, p, d, r = string.match(raw, '^(%d+) (%d+) (%d+) (%S*) ?(%d*)$')
      e, n, polls, last, resets = tonumber(se), tonumber(c), tonumber(p), d, tonumber(r) or 0
    end
    local moved = progress ~= '' and
                  redis.call('SADD', KEYS[3], #sig .. ':' .. sig .. '\\0' .. progress) == 1
    if mutating and redis.call('SADD', KEYS[3], #sig .. ':' .. sig .. digest) == 1 then
      -- progress (a): the world changed; this call is the first of the new epoch
      epoch = redis.call('HINCRBY', KEYS[1], 'epoch', 1)
      e, n, polls = epoch, 1, 0
    elseif last ~= '' and last ~= digest then
      if moved then
        -- progress (b): its progress fields moved to values it never had
        n, resets = 1, 0
      else
        -- progress (c): its output moved, unless it moved on every one of the last
        -- max_resets back-to-back calls
        if max_resets == 0 or resets < max_resets then n = 1 end
        resets = resets + 1
      end
    end
    redis.call('HSET', KEYS[2], sig,
               e .. ' ' .. n .. ' ' .. polls .. ' ' .. digest .. ' ' .. resets)
  end
end
if outcome ~= '' then  -- after progress: a call that made progress starts a new run
  local run = redis.call('HGET', KEYS[1], 's:' .. tool)
  local re, rn, ro, rs
  if run then re, rn, ro, rs = string.match(run, '^(%d+) (%d+) (%S+) (.*)$') end
  if not run or tonumber(re) ~= epoch or ro ~= outcome then
    redis.call('HSET', KEYS[1], 's:' .. tool, epoch .. ' 1 ' .. outcome .. ' ' .. sig)
  else
    -- the run's last signatures (newline-separated): a call with one of them again is a
    -- cycle's (the repeat ladder's to judge), any other grows the run
    local kept, cycle = {}, false
    for g in string.gmatch(rs, '[^\\n]+') do
      kept[#kept + 1] = g
      if g == sig then cycle = true end
    end
    if not cycle then
      kept[#kept + 1] = sig
      while #kept > 3 do table.remove(kept, 1) end
      redis.call('HSET', KEYS[1], 's:' .. tool, epoch .. ' ' .. (tonumber(rn) + 1) .. ' '
                 .. outcome .. ' ' .. table.concat(kept, '\\n'))
    end
  end
end
if key ~= '' then
  if mode == 'c' or mode == 'u' then
    redis.call('SET', KEYS[6],
               mode .. '|' .. changes .. '|' .. rec_exp .. '|' .. now .. '|' .. tail,
               'PX', rec_ms)
    redis.call('SADD', KEYS[5], key)
    extend(KEYS[5], rec_ms)
  elseif mode == 'r' then
    -- drop only this call's own claim (tail = its call id): an identical call may have
    -- re-claimed the key after this claim expired
    local v = redis.call('GET', KEYS[6])
    if v and string.sub(v, 1, 2) == 'p|' and string.sub(v, -#tail - 1) == '|' .. tail then
      redis.call('DEL', KEYS[6])
      redis.call('SREM', KEYS[5], key)
    end
  end
end
if halt ~= '' then redis.call('HSET', KEYS[1], 'halted', halt) end
touch(state_ms)
return {gen, 1}
"""

_SET_HALTED: Final = _PRELUDE + """
local gen = generation(true)
if not gen then return redis.error_reply(LOST) end
if ARGV[1] == '1' then
  redis.call('HSET', KEYS[1], 'halted', ARGV[2])
else
  redis.call('HDEL', KEYS[1], 'halted')
  for _, k in ipairs(redis.call('HKEYS', KEYS[1])) do  -- failure streaks restart
    if string.sub(k, 1, 2) == 'f:' then redis.call('HDEL', KEYS[1], k) end
  end
end
touch(tonumber(ARGV[3]))
return {gen, 1}
"""

_NEW_TURN: Final = _PRELUDE + """
local gen = generation(true)
if not gen then return redis.error_reply(LOST) end
redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('HINCRBY', KEYS[1], 'changes', 1)
touch(tonumber(ARGV[1]))
return {gen, 1}
"""

_ADD_USAGE: Final = _PRELUDE + """
local gen = generation(true)
if not gen then return redis.error_reply(LOST) end
redis.call('HSETNX', KEYS[1], 'started', ARGV[1])
local total = redis.call('HINCRBY', KEYS[1], 'in', ARGV[2])
total = total + redis.call('HINCRBY', KEYS[1], 'out', ARGV[3])
touch(tonumber(ARGV[4]))
return {gen, total}
"""

_ADD_COST: Final = _PRELUDE + """
local gen = generation(true)
if not gen then return redis.error_reply(LOST) end
redis.call('HSETNX', KEYS[1], 'started', ARGV[1])
local total = redis.call('HINCRBY', KEYS[1], 'cost', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'unpriced', ARGV[3])
local tool = 0
if ARGV[4] ~= '' then tool = redis.call('HINCRBY', KEYS[1], 'c:' .. ARGV[4], ARGV[2]) end
touch(tonumber(ARGV[5]))
return {gen, {total, tool}}
"""

# A read: it checks the generation but never starts one.
_READ_HASH: Final = _PRELUDE + """
local gen = generation(false)
if not gen then return redis.error_reply(LOST) end
local h = redis.call('HGETALL', KEYS[tonumber(ARGV[1])])
touch(tonumber(ARGV[2]))
return {gen, h}
"""

_SET_APPROVAL: Final = _PRELUDE + """
local gen = generation(true)
if not gen then return redis.error_reply(LOST) end
redis.call('HSET', KEYS[4], ARGV[1], ARGV[2])
touch(tonumber(ARGV[3]))
return {gen, 1}
"""

# RedisStore.retry_unknown (MemoryStore's): the unknown outcome of ARGV[2]'s call (a
# finished 'u' record, or its claim past the claim's TTL) becomes the retry's claim, as
# begin's put_claim writes one, and its approval is spent; anything else: 0, nothing changed.
_RETRY_UNKNOWN: Final = _PRELUDE + """
local key, origin, now = ARGV[1], ARGV[2], ARGV[3]
local gen = generation(true)
if not gen then return redis.error_reply(LOST) end
local v = redis.call('GET', KEYS[6])
local won = 0
if v and string.sub(v, -#origin - 1) == '|' .. origin then
  local st, e, x = string.match(v, '^(%a)|(%d+)|([^|]+)|')
  local unknown = st == 'u'
  if st == 'p' then
    local due = string.match(v, '^p|%d+|[^|]+|[^|]+|([%d.eE+-]+)|')
    unknown = due ~= nil and tonumber(due) <= tonumber(now)
  end
  if unknown and tonumber(x) > tonumber(now) then
    local claim_end_ms = tonumber(ARGV[7])
    redis.call('SET', KEYS[6], 'p|' .. e .. '|' .. ARGV[6] .. '|' .. now .. '|' .. ARGV[5]
               .. '|' .. ARGV[4], 'PX', claim_end_ms)
    redis.call('SADD', KEYS[5], key)
    extend(KEYS[5], claim_end_ms)
    redis.call('HSET', KEYS[4], key, ARGV[8])
    won = 1
  end
end
touch(tonumber(ARGV[9]))
return {gen, won}
"""

# A worker gives up the claims its begins took without it learning so (their replies were
# lost): KEYS[1] the record, ARGV[1] the claims' record tails, one a line. Another worker's
# identical call then takes the claim over instead of waiting for in_progress_ttl_s.
# Returns 1 (given up), 0 (no record: the begin has not run, or never will) or 2 (the record
# is not such a claim: taken over, completed, or another call's).
_ABANDON: Final = """
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
if string.sub(v, 1, 2) ~= 'p|' then return 2 end
for t in string.gmatch(ARGV[1], '[^\\n]+') do
  if string.sub(v, -#t - 1) == '|' .. t then
    redis.call('SET', KEYS[1], string.sub(v, 1, -#t - 1) .. '[null,null]', 'KEEPTTL')
    return 1
  end
end
return 2
"""

_CLEAR: Final = """
for _, key in ipairs(redis.call('SMEMBERS', KEYS[5])) do
  redis.call('DEL', ARGV[1] .. key)
end
return redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
"""


class _Script(NamedTuple):
    source: str
    sha: str


def _script(source: str) -> _Script:
    return _Script(source, hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest())


_BEGIN_SCRIPT: Final = _script(_BEGIN)
_FINISH_SCRIPT: Final = _script(_FINISH)
_SET_HALTED_SCRIPT: Final = _script(_SET_HALTED)
_NEW_TURN_SCRIPT: Final = _script(_NEW_TURN)
_ADD_USAGE_SCRIPT: Final = _script(_ADD_USAGE)
_ADD_COST_SCRIPT: Final = _script(_ADD_COST)
_READ_HASH_SCRIPT: Final = _script(_READ_HASH)
_SET_APPROVAL_SCRIPT: Final = _script(_SET_APPROVAL)
_RETRY_UNKNOWN_SCRIPT: Final = _script(_RETRY_UNKNOWN)
_CLEAR_SCRIPT: Final = _script(_CLEAR)
_ABANDON_SCRIPT: Final = _script(_ABANDON)
_LOST: Final = "TOOLGUARD_STATE_LOST"
