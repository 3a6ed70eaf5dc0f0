export const meta = {name: 'returned-map', slug: 'returned-map', version: '1'};
export default async function (args, g) {
  return {seen: new Map([["a", 1]])};
}
