//! A rule set from the `rls_config` paths: a directory's `*.yaml` and `*.yml` files in name
//! order, each file parsed (`parse.rs`), and the domains they name put together (an error
//! naming both files, or merged as envoyproxy's `MERGE_DOMAIN_CONFIG`).

use super::parse::parse_file;
use super::rules::{Domain, Level, Loading, Rules};
use std::path::{Path, PathBuf};

impl Rules {
    /// Loads and validates a whole rule set: `paths` in order, a directory's `*.yaml` and
    /// `*.yml` files sorted by name. Two files naming one domain are an error naming both,
    /// unless `how.merge_domains` (envoyproxy's `MERGE_DOMAIN_CONFIG`): then the later file's
    /// descriptors join the domain, a descriptor declared twice an error.
    pub fn load(paths: &[PathBuf], how: Loading) -> Result<Rules, String> {
        let mut rules = Rules::default();
        for path in paths {
            for file in expand(path)? {
                let text = std::fs::read_to_string(&file)
                    .map_err(|e| format!("rls_config {}: cannot read it: {e}", file.display()))?;
                let domain = parse_file(&file, &text)?;
                match rules.domains.get_mut(&domain.name) {
                    None => {
                        rules.domains.insert(domain.name.clone(), domain);
                    }
                    Some(other) if !how.merge_domains => {
                        return Err(format!(
                            "{}:{}: duplicate domain {:?}: {} declares it too. Put its \
                             descriptors in one file, or merge the files with \
                             rls_merge_domain_config = true (--rls-merge-domain-config, as \
                             envoyproxy's MERGE_DOMAIN_CONFIG)",
                            file.display(),
                            domain.line,
                            domain.name,
                            other
                                .files
                                .first()
                                .map_or(String::new(), |f| f.display().to_string()),
                        ));
                    }
                    Some(other) => other.merge(domain)?,
                }
            }
        }
        Ok(rules)
    }
}

impl Domain {
    /// Adds `other`'s descriptors (the same domain from a later file), as envoyproxy patches a
    /// domain: its top-level keys must be new; its wildcards come after ours.
    fn merge(&mut self, other: Domain) -> Result<(), String> {
        let file = other.files.first().cloned().unwrap_or_default();
        match (self.store_down, other.store_down) {
            (Some(a), Some(b)) if a != b => {
                return Err(format!(
                    "{}:{}: store_down {b} for domain {:?}, but {} gives it {a}: give it once",
                    file.display(),
                    other.line,
                    self.name,
                    self.files
                        .first()
                        .map_or(String::new(), |f| f.display().to_string()),
                ))
            }
            (None, b) => self.store_down = b,
            _ => {}
        }
        match (&self.class_key, other.class_key) {
            (Some(a), Some(b)) if *a != b => {
                return Err(format!(
                    "{}:{}: class_key {b:?} for domain {:?}, but {} gives it {a:?}: give it once",
                    file.display(),
                    other.line,
                    self.name,
                    self.files
                        .first()
                        .map_or(String::new(), |f| f.display().to_string()),
                ))
            }
            (None, b) => self.class_key = b,
            _ => {}
        }
        let mut children: Vec<(String, Level)> = other.root.children.into_iter().collect();
        children.sort_by_key(|(_, l)| l.line);
        for (key, child) in children {
            if let Some(mine) = self.root.children.get(&key) {
                return Err(format!(
                    "{}: duplicate descriptor composite key {}.{key} (also at {}): merged \
                     files must not declare one descriptor twice",
                    child.origin, self.name, mine.origin
                ));
            }
            self.root.children.insert(key, child);
        }
        self.root.wildcards.extend(other.root.wildcards);
        self.rules.extend(other.rules);
        self.files.push(file);
        Ok(())
    }
}

/// The files a `--rls-config` path stands for.
fn expand(path: &Path) -> Result<Vec<PathBuf>, String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("rls_config {}: {e}", path.display()))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries =
        std::fs::read_dir(path).map_err(|e| format!("rls_config {}: {e}", path.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let p = entry
            .map_err(|e| format!("rls_config {}: {e}", path.display()))?
            .path();
        let yaml = matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"));
        if yaml && p.is_file() {
            files.push(p);
        }
    }
    if files.is_empty() {
        // Most likely a wrong directory: serving no rules would admit everything silently.
        return Err(format!(
            "rls_config {}: the directory has no *.yaml or *.yml file",
            path.display()
        ));
    }
    files.sort();
    Ok(files)
}
