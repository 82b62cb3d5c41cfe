-- Going back: the changes become jsonb again, parsed from the JSON text the step before this (the
-- reverse of the re-encoding) made of the MessagePack.
ALTER TABLE rankings_batch ALTER COLUMN changes TYPE jsonb USING convert_from(changes, 'UTF8')::jsonb;
