-- The members ordered before (score, member): a higher score, or the same score and a smaller
-- member (lua/members_before.lua).
-- KEYS[1]: a board. ARGV: a score as stored (negated), a member.
--! include members_before
return members_before(KEYS[1], ARGV[1], ARGV[2])
