//! Node-API addons resolve node's symbols when node loads them; napi-build
//! sets the linker flags that allow it (needed on macOS, harmless elsewhere).
fn main() {
    napi_build::setup();
}
