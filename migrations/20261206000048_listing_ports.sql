-- The guest ports a listing's software listens on (vLLM's 8000): the launch form publishes
-- them unless the tenant changes the list. The same rule as a launch's published ports: at
-- most seven besides SSH, each 1 to 65535 and not 22, sorted without repeats.
ALTER TABLE listing_versions ADD COLUMN published_ports integer[] NOT NULL DEFAULT '{}';

ALTER TABLE listing_versions ADD CONSTRAINT listing_versions_published_ports_valid CHECK (
    cardinality(published_ports) <= 7
    AND 1 <= ALL (published_ports) AND 65535 >= ALL (published_ports)
    AND 22 <> ALL (published_ports)
    AND array_position(published_ports, NULL) IS NULL
);
