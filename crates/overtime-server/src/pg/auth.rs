//! Who may connect: the password is the API's bearer token, under any
//! user name (docs/postgres.md suggests `overtime`), compared in constant
//! time and never logged; every refusal is counted. Without a token the
//! front door is as open as the HTTP API is. With TLS configured, a client
//! that did not ask for TLS is refused before it sends its password.

use super::handler::SignedIn;
use super::stats::PgStats;
use crate::auth::constant_time_eq;
use async_trait::async_trait;
use futures::{Sink, SinkExt};
use pgwire::api::auth::{
    DefaultServerParameterProvider, LoginInfo, StartupHandler, finish_authentication,
    protocol_negotiation, save_startup_parameters_to_metadata,
};
use pgwire::api::{
    ClientInfo, ConnectionManager, PgWireConnectionState, PidSecretKeyGenerator,
    RandomPidSecretKeyGenerator,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::startup::Authentication;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use datafusion_postgres::pgwire;

/// The startup of every connection: TLS required when configured, the
/// token as the password, then the cancel key registered.
pub(crate) struct TokenStartup {
    pub token: Option<String>,
    pub tls_required: bool,
    pub manager: Arc<ConnectionManager>,
    pub keys: RandomPidSecretKeyGenerator,
    pub params: DefaultServerParameterProvider,
    pub stats: Arc<PgStats>,
}

fn fatal(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "FATAL".into(),
        code.into(),
        message.into(),
    )))
}

impl TokenStartup {
    async fn accept<C>(&self, client: &mut C) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let (pid, key) = self.keys.generate(client);
        client.set_pid_and_secret_key(pid, key.clone());
        // CancelRequest finds the connection's running query by (pid, key).
        let (handle, guard) = self.manager.register(pid, key);
        client.session_extensions().insert(handle);
        client.session_extensions().insert(guard);
        client.session_extensions().insert(SignedIn);
        self.stats.accepted.fetch_add(1, Relaxed);
        finish_authentication(client, &self.params).await
    }
}

#[async_trait]
impl StartupHandler for TokenStartup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match message {
            PgWireFrontendMessage::Startup(ref startup) => {
                protocol_negotiation(client, startup).await?;
                save_startup_parameters_to_metadata(client, startup);
                if self.tls_required && !client.is_secure() {
                    self.stats.refused_no_tls.fetch_add(1, Relaxed);
                    return Err(fatal(
                        "28000",
                        "this server accepts TLS connections only (sslmode=require)",
                    ));
                }
                if self.token.is_none() {
                    return self.accept(client).await;
                }
                client.set_state(PgWireConnectionState::AuthenticationInProgress);
                client
                    .send(PgWireBackendMessage::Authentication(
                        Authentication::CleartextPassword,
                    ))
                    .await?;
            }
            PgWireFrontendMessage::PasswordMessageFamily(pwd) => {
                let pwd = pwd.into_password()?;
                let token = self.token.as_deref().unwrap_or_default();
                if constant_time_eq(pwd.password.trim().as_bytes(), token.as_bytes()) {
                    return self.accept(client).await;
                }
                self.stats.refused_bad_password.fetch_add(1, Relaxed);
                let user = LoginInfo::from_client_info(client)
                    .user()
                    .unwrap_or_default()
                    .to_string();
                return Err(fatal(
                    "28P01",
                    format!(
                        "password authentication failed for user \"{user}\": the password is the API token ([server] token_env)"
                    ),
                ));
            }
            _ => {}
        }
        Ok(())
    }
}
