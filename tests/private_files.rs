//! The databases the service and the desktop create (with their WAL and shared-memory files)
//! are readable by their owner alone, and so are the folders made for them, under umask 022.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use relay_desktop::state::DesktopState;
use relay_service::store::SqliteStore;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn the_service_and_desktop_databases_are_0600_in_0700_folders() {
    // Every file these tests create is the tests' own; 022 is the usual default anyway.
    // SAFETY: umask only sets this process's file-creation mask.
    unsafe { libc::umask(0o022) };
    let dir = tempfile::tempdir().expect("tempdir");
    let service = dir.path().join("service/relay.db");
    let store = SqliteStore::open(&service).expect("store");
    let desktop = dir.path().join("desktop/state/desktop.db");
    let state = DesktopState::open(&desktop).expect("state");
    state
        .set_project_enabled("p", true, relay_protocol::clock::Timestamp::EPOCH)
        .expect("write");
    for db in [&service, &desktop] {
        for suffix in ["", "-wal", "-shm"] {
            let file = Path::new(&format!("{}{suffix}", db.display())).to_owned();
            assert_eq!(mode(&file), 0o600, "{}", file.display());
        }
    }
    for folder in ["service", "desktop", "desktop/state"] {
        assert_eq!(mode(&dir.path().join(folder)), 0o700, "{folder}");
    }
    drop((store, state));
}
