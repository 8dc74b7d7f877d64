-- A psql session against `timeshard serve` (tests/integration/test_serve.py runs it).
CREATE SOURCE shop FROM LOAD GENERATOR AUCTION (ORGANIZATIONS 3, USERS 12, RATE 2);
CREATE MATERIALIZED VIEW org_users AS
  SELECT org_id, count(*) AS users FROM shop.users GROUP BY org_id;
CREATE MATERIALIZED VIEW org_names WITH (RETAIN HISTORY FOR '1h') AS
  SELECT o.name, u.users FROM shop.organizations o JOIN org_users u ON u.org_id = o.id;
SHOW SOURCES;
SHOW MATERIALIZED VIEWS;
EXPLAIN org_users;
SHOW CREATE MATERIALIZED VIEW org_users;
-- The first read of a view just created waits for its first readable time.
SELECT * FROM org_names ORDER BY name;
SELECT upper - 1 AS t, upper AS u FROM timeshard_objects WHERE name = 'org_names' \gset
SELECT * FROM org_names ORDER BY name AS OF :t;
SELECT name, type, status FROM timeshard_objects WHERE object IS NOT NULL ORDER BY name;
-- A bounded SUBSCRIBE: the snapshot at :t, nothing after it (UP TO is exclusive).
COPY (SUBSCRIBE org_names AS OF :t UP TO :u) TO STDOUT;
-- Errors are PostgreSQL errors, and the session goes on.
SELECT * FROM nowhere;
SELECT 1 / 0;
CREATE SOURCE broken FROM LOAD GENERATOR NOTHING;
DROP SOURCE shop;
DROP SOURCE shop CASCADE;
SHOW OBJECTS;
