-- 028: the handler name in the kind catalog.
--
-- twice_kinds.handler_name is the name the kind's markers and steps are
-- stored under (KindOpts.HandlerName), so that tools not built with the
-- kind read them where its workers wrote them. '' is the kind itself: what
-- every kind published before this migration reads as until its node
-- publishes again.

ALTER TABLE twice_kinds ADD COLUMN handler_name text NOT NULL DEFAULT '';
