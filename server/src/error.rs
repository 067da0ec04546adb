//! The server layer's one error enum: what can stop the process from starting or serving.
//! Request-level errors are the app's (`app::AppError`) and the control plane's.

use std::io;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("could not listen on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: io::Error,
    },
    #[error("could not connect to the database: {0}")]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    ControlPlane(#[from] control_plane::Error),
    #[error("server failed: {0}")]
    Serve(io::Error),
}
