//! Bearer-token auth, as LocalAI's backends do it: with `LOCALAI_GRPC_AUTH_TOKEN` set, every
//! RPC needs `authorization: Bearer <token>`, compared in constant time.

use tonic::{Request, Status};

use crate::options::Env;

#[derive(Clone)]
pub struct AuthInterceptor {
    expected: Option<Vec<u8>>,
}

impl AuthInterceptor {
    /// The token from `LOCALAI_GRPC_AUTH_TOKEN` in `env` (empty: none).
    pub fn from_env(env: &dyn Env) -> AuthInterceptor {
        AuthInterceptor::new(env.var("LOCALAI_GRPC_AUTH_TOKEN"))
    }

    pub fn new(token: Option<String>) -> AuthInterceptor {
        AuthInterceptor {
            expected: token.map(|t| format!("Bearer {t}").into_bytes()),
        }
    }
}

impl tonic::service::Interceptor for AuthInterceptor {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let Some(expected) = &self.expected else {
            return Ok(request);
        };
        let Some(value) = request.metadata().get("authorization") else {
            return Err(Status::unauthenticated("missing authorization header"));
        };
        if !value.as_bytes().starts_with(b"Bearer ") {
            return Err(Status::unauthenticated(
                "authorization must use Bearer scheme",
            ));
        }
        if !constant_time_eq(value.as_bytes(), expected) {
            return Err(Status::unauthenticated("invalid token"));
        }
        Ok(request)
    }
}

/// Compares without stopping at the first difference, so timing reveals nothing but the length.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u8 | u8::from(a.len() != b.len());
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::service::Interceptor;

    fn call(token: Option<&str>, header: Option<&str>) -> Result<(), tonic::Code> {
        let mut req = Request::new(());
        if let Some(h) = header {
            req.metadata_mut()
                .insert("authorization", h.parse().expect("ascii"));
        }
        AuthInterceptor::new(token.map(str::to_string))
            .call(req)
            .map(|_| ())
            .map_err(|s| s.code())
    }

    #[test]
    fn token_checks() {
        assert_eq!(call(None, None), Ok(()));
        assert_eq!(call(Some("s3cret"), Some("Bearer s3cret")), Ok(()));
        for bad in [
            None,
            Some("Bearer nope"),
            Some("Basic s3cret"),
            Some("Bearer s3cre"),
            Some("Bearer s3crett"),
        ] {
            assert_eq!(
                call(Some("s3cret"), bad),
                Err(tonic::Code::Unauthenticated),
                "{bad:?}"
            );
        }
    }
}
