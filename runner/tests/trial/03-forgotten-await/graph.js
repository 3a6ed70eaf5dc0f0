export const meta = {name: 'forgotten-await', slug: 'forgotten-await', version: '1'};
async function fetchName() { return "ada"; }
export default async function (args, g) {
  const name = fetchName();
  return name.toUpperCase();
}
