//! CSV for people's spreadsheets (RFC 4180 quoting), safe to open: a cell a spreadsheet would
//! run as a formula (`=`, `+`, `@`, or `-` not starting a number) is prefixed with `'`.

/// One line of CSV, with its newline.
pub fn row(cells: &[&str]) -> String {
    let mut out = cells
        .iter()
        .map(|c| {
            let c = if c.starts_with(['=', '+', '@'])
                || (c.starts_with('-') && c.parse::<f64>().is_err())
            {
                format!("'{c}")
            } else {
                c.to_string()
            };
            if c.contains([',', '"', '\n', '\r']) {
                format!("\"{}\"", c.replace('"', "\"\""))
            } else {
                c
            }
        })
        .collect::<Vec<_>>()
        .join(",");
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::row;

    #[test]
    fn cells_are_quoted_and_formulas_disarmed() {
        assert_eq!(
            row(&["a", "b,c", "say \"hi\""]),
            "a,\"b,c\",\"say \"\"hi\"\"\"\n"
        );
        assert_eq!(
            row(&["=1+1", "-12.5", "-x", "@me"]),
            "'=1+1,-12.5,'-x,'@me\n"
        );
        assert_eq!(row(&["x\"y", "plain"]), "\"x\"\"y\",plain\n");
    }
}
