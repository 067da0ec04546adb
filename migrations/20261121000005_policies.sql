-- The policy chain: settings at global, tenant and project level; the most specific wins.
-- Keys are a closed set and each key's value has a checked shape.

CREATE TABLE policies (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- Both NULL: global. tenant_id only: that tenant. Both: that project.
    tenant_id  uuid REFERENCES tenants (id),
    project_id uuid,
    key        text NOT NULL CHECK (key IN (
                   'max_gpus_in_use', 'allowed_skus', 'allowed_regions',
                   'max_allocation_lifetime_hours', 'monthly_budget')),
    value      jsonb NOT NULL,
    updated_by uuid REFERENCES users (id),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CHECK (project_id IS NULL OR tenant_id IS NOT NULL),
    FOREIGN KEY (tenant_id, project_id) REFERENCES projects (tenant_id, id),
    CONSTRAINT policies_value_shape CHECK (CASE key
        WHEN 'max_gpus_in_use' THEN
            jsonb_typeof(value) = 'number' AND value::numeric >= 0
            AND value::numeric = trunc(value::numeric) AND value::numeric <= 100000
        WHEN 'max_allocation_lifetime_hours' THEN
            jsonb_typeof(value) = 'number' AND value::numeric >= 1
            AND value::numeric = trunc(value::numeric) AND value::numeric <= 8760
        WHEN 'allowed_skus' THEN
            jsonb_typeof(value) = 'array' AND jsonb_array_length(value) > 0
        WHEN 'allowed_regions' THEN
            jsonb_typeof(value) = 'array' AND jsonb_array_length(value) > 0
        WHEN 'monthly_budget' THEN
            jsonb_typeof(value) = 'object'
            AND jsonb_typeof(value -> 'amount_minor') = 'number'
            AND (value ->> 'amount_minor')::numeric >= 0
            AND (value ->> 'currency') ~ '^[A-Z]{3}$'
        ELSE false
    END)
);
-- One setting per key per scope (global included: NULLs are not distinct here).
CREATE UNIQUE INDEX policies_scope_key ON policies (tenant_id, project_id, key) NULLS NOT DISTINCT;
