//! HTTP messages as both protocols and the app side see them: request
//! heads and bodies, response heads, the Date header.

pub mod body;
pub mod date;
pub mod head;
pub mod methods;
pub mod response;
