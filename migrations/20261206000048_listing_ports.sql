-- The guest ports a listing's software listens on (vLLM's 8000): the launch form publishes
-- them unless the tenant changes the list. The same rule as a launch's published ports.
ALTER TABLE listing_versions
    ADD COLUMN published_ports integer[] NOT NULL DEFAULT '{}'
        CONSTRAINT listing_versions_published_ports_valid
        CHECK (published_ports_ok(published_ports));
