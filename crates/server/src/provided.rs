//! What a deploy checks of a custom runtime (`runtime: provided`): its
//! program is the code's own `bootstrap`, served through Lambda's Runtime
//! API (`thaw_sandbox::runtime_api`), so the agent's entry points and hooks
//! do not apply and the handler is only passed on (`_HANDLER`).
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// A custom runtime's handler: any short printable name, as Lambda's.
pub fn check_handler(handler: &str) -> Result<(), String> {
    if handler.is_empty() || handler.len() > 128 || handler.chars().any(char::is_control) {
        return Err(format!(
            "handler {handler:?} must be 1 to 128 printable characters"
        ));
    }
    Ok(())
}

/// The agent's hooks (`init`, `before_snapshot`, `after_restore`) are not
/// a bootstrap's: it runs its own init and hooks.
pub fn check_no_hooks(hooks: &[(&str, &Option<String>)]) -> Result<(), String> {
    crate::deploy::request::refuse_hooks(hooks, "; a custom runtime's bootstrap runs its own")
}

/// The unpacked code must hold an executable regular file `bootstrap` at
/// its top.
pub fn check_bootstrap(code_dir: &Path) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(code_dir.join("bootstrap")).map_err(|_| {
        "a custom runtime's code has no bootstrap file at the top of the package".to_string()
    })?;
    if !meta.is_file() || meta.permissions().mode() & 0o100 == 0 {
        return Err(
            "the package's bootstrap is not an executable file (zip it with its mode, chmod +x)"
                .into(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handlers_and_hooks_are_checked() {
        assert!(check_handler("bootstrap").is_ok());
        assert!(check_handler("hello.handler").is_ok());
        assert!(check_handler("").is_err());
        assert!(check_handler("a\nb").is_err());
        assert!(check_no_hooks(&[("init", &None)]).is_ok());
        let e = check_no_hooks(&[("init", &None), ("after_restore", &Some("m.f".into()))]);
        assert!(e.unwrap_err().contains("after_restore"));
    }

    #[test]
    fn the_bootstrap_must_be_an_executable_file() {
        let d = std::env::temp_dir().join(format!("thaw-provided-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        assert!(check_bootstrap(&d).unwrap_err().contains("no bootstrap"));
        let b = d.join("bootstrap");
        std::fs::write(&b, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&b, std::fs::Permissions::from_mode(0o444)).unwrap();
        assert!(check_bootstrap(&d)
            .unwrap_err()
            .contains("not an executable"));
        std::fs::set_permissions(&b, std::fs::Permissions::from_mode(0o555)).unwrap();
        assert!(check_bootstrap(&d).is_ok());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
