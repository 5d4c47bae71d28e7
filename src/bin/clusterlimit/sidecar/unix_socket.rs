//! The sidecar's Unix socket, created with the configured mode and no window in which anyone
//! else could connect to it.

use crate::common::{exit, Failure};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::path::Path;
use tokio::net::UnixListener;

/// Binds `path` with permissions `mode`. The socket is bound inside a fresh 0700 directory
/// next to `path`, given its mode, then renamed into place: a socket bound in place would
/// carry the umask's mode until the chmod, and a connection made then would be served.
pub fn bind(path: &Path, mode: u32) -> Result<UnixListener, Failure> {
    let fail = |what: &str, e: std::io::Error| {
        Failure::new(
            exit::UNAVAILABLE,
            format!("cannot listen on {}: {what}: {e}", path.display()),
        )
    };
    // A socket left by a previous run is replaced; anything else there is never touched
    // (the rename below would replace a file silently).
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if !m.file_type().is_socket() {
            return Err(fail(
                "a file that is not a socket is in the way",
                std::io::ErrorKind::AlreadyExists.into(),
            ));
        }
        let _ = std::fs::remove_file(path);
    }
    let name = path
        .file_name()
        .ok_or_else(|| fail("not a file path", std::io::ErrorKind::InvalidInput.into()))?;
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let private = parent.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    // Left over by a run killed right here (in a container the pid is the same every time).
    let _ = std::fs::remove_file(private.join("sock"));
    let _ = std::fs::remove_dir(&private);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&private)
        .map_err(|e| fail("creating a private directory beside it", e))?;
    let staged = private.join("sock");
    let result = (|| {
        let listener = UnixListener::bind(&staged).map_err(|e| fail("bind", e))?;
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(mode))
            .map_err(|e| fail(&format!("setting mode {mode:04o}"), e))?;
        std::fs::rename(&staged, path).map_err(|e| fail("moving it into place", e))?;
        Ok(listener)
    })();
    let _ = std::fs::remove_file(&staged);
    let _ = std::fs::remove_dir(&private);
    result
}
