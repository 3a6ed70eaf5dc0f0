//! Pre-initialization with wizer: the generic guest snapshotted with its interpreter ready
//! (built once per machine), and `runner build`, which snapshots a guest with one graph
//! evaluated into a component of its own.

use std::time::Duration;

use graph_js::FailureCode;
use wasmtime::Store;
use wasmtime::component::{Component, HasSelf, Linker};

use super::bindings::{GUEST_SHA256, GUEST_WASM, Graph, HostState, link_wasi};
use super::engines::engine_for;
use super::instance::{describe_invocation, describe_trap, new_store};
use super::limits::WasmLimits;
use super::{WasmError, setup};

/// Names the pre-initialized generic guest in the caches; the suffix changes when what the
/// snapshot holds does.
pub(super) fn blank_key() -> String {
    format!("{GUEST_SHA256}-blank1")
}

/// The generic guest pre-initialized with an interpreter and no graph (`initialize("")`).
/// Built on a thread of its own with its own runtime, so it works from inside a runtime and
/// from none. The snapshot does not depend on the limits runs get, so it is always taken with
/// the defaults: a small `--fuel` or memory cap limits the graph, not the set-up before it.
pub(super) fn build_blank() -> Result<Vec<u8>, WasmError> {
    build_blank_of(GUEST_WASM)
}

/// [`build_blank`] for the guest component `guest` (the built-in one, or another build of it
/// a benchmark compares).
pub(super) fn build_blank_of(guest: &'static [u8]) -> Result<Vec<u8>, WasmError> {
    let limits = WasmLimits::default();
    tracing::info!("pre-initializing the generic guest (seconds, once per machine)");
    let built = std::thread::Builder::new()
        .name("wasm-pre-init".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .map_err(setup)?;
            runtime
                .block_on(pre_initialize(guest, "", limits))
                .map_err(|e| WasmError::Setup(e.to_string()))
        })
        .map_err(setup)?
        .join();
    built.unwrap_or_else(|_| Err(WasmError::Setup("pre-initialization panicked".into())))
}

/// `runner build` may take this long to evaluate a graph's top-level code.
pub const BUILD_DEADLINE: Duration = Duration::from_secs(30);

/// Why a graph could not be compiled into its own component.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The sandbox could not be set up.
    #[error(transparent)]
    Setup(#[from] WasmError),
    /// The graph did not parse, failed at top level, or has no valid `meta`.
    #[error("{0}")]
    Graph(String),
    /// Pre-initialization (wizer) failed.
    #[error("cannot snapshot the initialized graph: {0}")]
    Snapshot(String),
}

/// Compiles `script` into a self-contained component: the guest, pre-initialized with wizer
/// after parsing, linking and evaluating the graph (its top-level code runs now, in the sandbox,
/// with the same limits and a [`BUILD_DEADLINE`]). The result exports the `graph` world (and
/// the unused `initialize`); its `run` and `describe` take an empty script for the graph built in.
pub async fn build_component(script: &str, limits: WasmLimits) -> Result<Vec<u8>, BuildError> {
    if script.trim().is_empty() {
        return Err(BuildError::Graph(
            "the graph is empty: a graph exports `meta` and a default function".into(),
        ));
    }
    pre_initialize(GUEST_WASM, script, limits).await
}

/// The guest component `guest` snapshotted after `initialize(script)`; an empty script leaves
/// an interpreter with the prelude evaluated and no graph.
async fn pre_initialize(
    guest: &[u8],
    script: &str,
    limits: WasmLimits,
) -> Result<Vec<u8>, BuildError> {
    use wasmtime_wizer::Wizer;
    let mut wizer = Wizer::new();
    // Keeping the export is required: wizer removes it from the core module, but the
    // component's lift of it would then dangle. The host never calls it after the build.
    wizer.init_func("initialize").keep_init_func(true);
    let (context, instrumented) = wizer
        .instrument_component(guest)
        .map_err(|e| BuildError::Snapshot(format!("{e:#}")))?;
    let engine = engine_for(limits)?;
    let component = Component::new(&engine, &instrumented).map_err(setup)?;
    let mut linker = Linker::<HostState>::new(&engine);
    link_wasi(&mut linker).map_err(setup)?;
    Graph::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |state| state)
        .map_err(setup)?;
    let invocation = describe_invocation();
    let run = invocation.run().clone();
    let mut store =
        new_store(&engine, limits, invocation).map_err(|e| BuildError::Graph(e.to_string()))?;
    let instance = linker
        .instantiate_async(&mut store, &component)
        .await
        .map_err(|e| BuildError::Graph(describe_trap(&e, &store, limits)))?;
    let initialize = instance
        .get_typed_func::<(&str,), (Result<(), String>,)>(&mut store, "initialize")
        .map_err(setup)?;
    let initialized = tokio::select! {
        called = initialize.call_async(&mut store, (script,)) => called,
        () = tokio::time::sleep(BUILD_DEADLINE) => {
            run.stop(FailureCode::Failed, format!("evaluating the graph took longer than {} s", BUILD_DEADLINE.as_secs()));
            return Err(BuildError::Graph(format!("evaluating the graph took longer than {} s", BUILD_DEADLINE.as_secs())));
        }
    };
    match initialized {
        Ok((Ok(()),)) => {}
        Ok((Err(message),)) => return Err(BuildError::Graph(message)),
        Err(trap) => return Err(BuildError::Graph(describe_trap(&trap, &store, limits))),
    }
    let mut state = SnapshotState {
        store: &mut store,
        instance,
        error: None,
    };
    let snapshot = wizer
        .snapshot_component(&context, &mut state)
        .await
        .map_err(|e| BuildError::Snapshot(format!("{e:#}")))?;
    if let Some(error) = state.error {
        return Err(BuildError::Snapshot(error));
    }
    Ok(snapshot)
}

/// Lets wizer read the initialized instance's memories and globals through the accessor
/// functions its instrumentation exported.
struct SnapshotState<'a> {
    store: &'a mut Store<HostState>,
    instance: wasmtime::component::Instance,
    error: Option<String>,
}

impl SnapshotState<'_> {
    async fn call<R>(&mut self, instance: &str, func: &str) -> Option<R>
    where
        R: wasmtime::component::ComponentType + wasmtime::component::Lift + Send + Sync + 'static,
    {
        let found = self
            .instance
            .get_export_index(&mut *self.store, None, instance)
            .and_then(|parent| {
                self.instance
                    .get_export_index(&mut *self.store, Some(&parent), func)
            });
        let Some(index) = found else {
            self.error.get_or_insert_with(|| {
                format!("the instrumented component lacks {instance}#{func}")
            });
            return None;
        };
        let typed = match self
            .instance
            .get_typed_func::<(), (R,)>(&mut *self.store, index)
        {
            Ok(typed) => typed,
            Err(e) => {
                self.error
                    .get_or_insert_with(|| format!("{instance}#{func}: {e:#}"));
                return None;
            }
        };
        match typed.call_async(&mut *self.store, ()).await {
            Ok((value,)) => Some(value),
            Err(e) => {
                self.error
                    .get_or_insert_with(|| format!("{instance}#{func}: {e:#}"));
                None
            }
        }
    }
}

impl wasmtime_wizer::ComponentInstanceState for SnapshotState<'_> {
    async fn call_func_ret_list_u8(
        &mut self,
        instance: &str,
        func: &str,
        contents: impl FnOnce(&[u8]) + Send,
    ) {
        match self
            .call::<wasmtime::component::WasmList<u8>>(instance, func)
            .await
        {
            Some(list) => contents(list.as_le_slice(&*self.store)),
            None => contents(&[]),
        }
    }

    async fn call_func_ret_s32(&mut self, instance: &str, func: &str) -> i32 {
        self.call::<i32>(instance, func).await.unwrap_or_default()
    }

    async fn call_func_ret_s64(&mut self, instance: &str, func: &str) -> i64 {
        self.call::<i64>(instance, func).await.unwrap_or_default()
    }

    async fn call_func_ret_f32(&mut self, instance: &str, func: &str) -> u32 {
        self.call::<f32>(instance, func)
            .await
            .map(f32::to_bits)
            .unwrap_or_default()
    }

    async fn call_func_ret_f64(&mut self, instance: &str, func: &str) -> u64 {
        self.call::<f64>(instance, func)
            .await
            .map(f64::to_bits)
            .unwrap_or_default()
    }
}
