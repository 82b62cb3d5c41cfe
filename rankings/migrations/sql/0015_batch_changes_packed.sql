-- A logged batch's changes become bytes, for now the JSON text they held; the step after this
-- re-encodes them as MessagePack. A tick over a backlog logs hundreds of thousands of changes, and
-- as jsonb each string is quoted by the client and parsed by the server, many times the cost of
-- the batch's other work.
ALTER TABLE rankings_batch ALTER COLUMN changes TYPE bytea USING convert_to(changes::text, 'UTF8');
